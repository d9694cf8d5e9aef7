# Verbs for the lab. `make demo` and `make test` work from a fresh clone:
# each sets up what it needs (venv, Kafka jars, both services) first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_JAR := .cache/kafka/libs/kafka_2.13-4.3.1.jar

.PHONY: setup up down status demo test lint

setup: $(VENV)/.installed $(KAFKA_JAR)

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed, found " + sys.version.split()[0])'
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(KAFKA_JAR): $(VENV)/.installed stack/pom.xml
	$(PY) stack.py fetch

up: setup
	$(PY) stack.py up

down:
	@if [ -x $(PY) ]; then $(PY) stack.py down; else echo "nothing to stop: no $(VENV)"; fi

status: setup
	$(PY) stack.py status

demo: up
	$(PY) tour.py

test: up
	$(PY) -m pytest

lint: setup
	$(VENV)/bin/ruff check .
