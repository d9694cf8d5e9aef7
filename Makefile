# Verbs for the lab. `make demo` and `make test` work from a fresh clone:
# each sets up what it needs (venv, Kafka jars, both services) first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
KAFKA_JAR := .cache/kafka/libs/kafka_2.13-4.3.1.jar
FORCE ?=
# make test's second stack, for the tests that restart a service (see test:)
SERIAL_STACK := LAB_STACK_HOME=$(CURDIR)/.cache/serial KAFKA_BROKERS=localhost:59392 \
  CONSUMER_DSN=postgresql://inbox_consumer:inbox_consumer@localhost:55732/consumer

.PHONY: setup setup-frameworks examples up down status demo tour test test-seed test-post test-frameworks test-examples lint measure measure-conformance report up-replicated test-replicated measure-cluster

setup: $(VENV)/.installed $(KAFKA_JAR)

$(VENV)/.installed: requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "Python 3.10 or newer is needed, found " + sys.version.split()[0])'
	@$(PYTHON) -m venv $(VENV) || { echo "make: $(PYTHON) -m venv failed: install the venv module (apt-get install python3-venv), then run make again" >&2; rm -rf $(VENV); exit 1; }
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

# M9's frameworks: FastStream in the lab's venv, Quix Streams in one of its own (it pins an
# older confluent-kafka). `make test-frameworks` needs them; `make test` and `make demo` do not.
VENV_QUIX := .venv-quix
setup-frameworks: setup $(VENV)/.frameworks $(VENV_QUIX)/.installed

$(VENV)/.frameworks: requirements-frameworks.txt $(VENV)/.installed
	$(VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements-frameworks.txt
	touch $@

$(VENV_QUIX)/.installed: requirements-quix.txt
	@$(PYTHON) -m venv $(VENV_QUIX) || { echo "make: $(PYTHON) -m venv failed: install the venv module (apt-get install python3-venv), then run make again" >&2; rm -rf $(VENV_QUIX); exit 1; }
	$(VENV_QUIX)/bin/pip install --quiet --disable-pip-version-check -r requirements-quix.txt
	touch $@

# The consumers outside Python (docs/your-consumer.md): the Java pair, built with Maven from
# Maven Central (kafka-clients 4.3.1, PostgreSQL's JDBC driver), and the Go pair, built with Go
# from the Go module proxy (franz-go, pgx). `make test-examples` needs them.
JAVA_EXAMPLES := examples/java/target/consumers.jar
GO_EXAMPLES := examples/go/bin/inbox examples/go/bin/autocommit
examples: $(JAVA_EXAMPLES) $(GO_EXAMPLES)

$(GO_EXAMPLES): examples/go/go.mod examples/go/go.sum $(wildcard examples/go/cmd/*/*.go examples/go/internal/*/*.go)
	@command -v go >/dev/null || { echo "make examples: Go 1.26 (go) is needed for examples/go: https://go.dev/dl/" >&2; exit 1; }
	cd examples/go && go build -buildvcs=auto -o bin/ ./cmd/$(notdir $@)  # stamps the commit: --version names it

# " built from <commit>" for the jar's --version, as go build stamps the Go pair (with local changes
# when git status lists any file, as go's vcs.modified does); nothing outside a git checkout
JAVA_BUILT_FROM = $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && \
  echo " built from $$c$$([ -z "$$(git status --porcelain)" ] || echo ' with local changes')")

$(JAVA_EXAMPLES): examples/java/pom.xml $(wildcard examples/java/src/main/java/inbox/*.java)
	@command -v mvn >/dev/null || { echo "make examples: Maven (mvn) and a JDK 17 are needed: apt-get install maven" >&2; exit 1; }
	mvn -q -f examples/java/pom.xml package -Dbuilt.from="$(JAVA_BUILT_FROM)"

$(KAFKA_JAR): $(VENV)/.installed lab/pom.xml
	$(PY) -m lab.stack fetch

up: setup
	$(PY) -m lab.stack up

down:
	@if [ -x $(PY) ]; then $(PY) -m lab.stack down; status=$$?; \
	  if [ -d .cache/serial ]; then $(SERIAL_STACK) $(PY) -m lab.stack down || status=1; fi; exit $$status; \
	  else echo "nothing to stop: no $(VENV)"; fi

status: setup
	$(PY) -m lab.stack status

# The main job, short: the post's test (a crash right after the database commit of one credit,
# before its offset commit) for b, without the inbox, and c, with it; then each SIGKILLed 5 times
# over 2,000 credits.
demo: up
	$(PY) measure_kill.py --variant b,c --planted-crash 40 --runs 1 --kills 5 --events 2000 \
	  --out .cache/demo-kill.json --force --explain

# The pattern end to end in a minute: duplicates skipped, poison dead-lettered, exact balances.
tour: up
	$(PY) -m measurements.tour

# The full measurements with the post's parameters, one after another (never two at once),
# then the README tables and chart, into the committed results/ files (--out). Takes hours; each harness
# resumes where it stopped if the code is the same, and refuses a file measured by other code:
# `make measure FORCE=--force` measures such files again from the start.
measure: up
	$(PY) measure_kill.py $(FORCE) --variant all --runs 5 --kills 20 --events 10000 --out results/kill.json
	$(PY) measure_kill.py $(FORCE) --variant all --consumers 3 --runs 5 --kills 20 --events 10000 \
	  --out results/kill-consumers3.json
	$(PY) measure_kill.py $(FORCE) --variant d --runs 5 --kills 20 --events 10000 --out results/kill-d.json
	$(PY) measure_kill.py $(FORCE) --variant d --batch 50 --runs 5 --kills 20 --events 10000 --out results/kill-d-batch50.json
	$(PY) measure_throughput.py $(FORCE) --variants raw,a1,a2,b,c,d --runs 5 --events 100000 --out results/throughput.json
	$(PY) measure_throughput.py $(FORCE) --sweep-batch 1,10,100,500,1000 --runs 5 --events 50000 --out results/throughput-batch.json
	$(PY) -m measurements.profile_d --out results/profile-d.txt
	for v in b c d; do for p in classic consumer; do \
	  $(PY) measure_rebalance.py $(FORCE) --variant $$v --group-protocol $$p --runs 5 \
	    --out results/rebalance-$$v-$$p.json || exit 1; done; done
	for v in b c; do $(PY) measure_rebalance.py $(FORCE) --variant $$v --group-protocol consumer --slow-seconds 20 \
	  --runs 5 --out results/rebalance-$$v-consumer-stall20.json || exit 1; done
	$(PY) measure_storage.py $(FORCE) --runs 5 --rows 1000000 --out results/storage.json
	$(PY) -m measurements.measure_external $(FORCE) --policy all --runs 5 --out results/external.json
	for f in pg-restart broker-restart partition-broker partition-db; do for v in b c d; do \
	  $(PY) -m measurements.measure_faults $(FORCE) --fault $$f --variant $$v --runs 5 --out results/faults.json \
	    || exit 1; done; done
	for v in b c; do $(PY) -m measurements.measure_faults $(FORCE) --fault share-lock --variant $$v --runs 5 \
	  --out results/faults.json || exit 1; done
	$(PY) -m measurements.measure_faults $(FORCE) --fault share-lock --variant b --runs 5 --producer-batching --max-poll-records 0 \
	  --work-ms 0 --lock-ms 5000 --out results/faults-share-batched.json
	$(PY) -m measurements.measure_race $(FORCE) --variant all --consumers 3 --copies 3 --accounts 20 --runs 5 \
	  --out results/race.json
	for v in b c; do $(PY) measure_rebalance.py $(FORCE) --variant $$v --runs 1 --out results/rebalance-timeline-$$v.json || exit 1; done
	for f in pg-restart broker-restart partition-broker partition-db share-lock; do for v in b c; do \
	  $(PY) -m measurements.measure_faults $(FORCE) --fault $$f --variant $$v --runs 1 --out results/faults-timeline.json || exit 1; done; done
	$(PY) measure_throughput.py $(FORCE) --sweep-lanes 1,4,16,64 --work-ms 10 --runs 5 --events 5000 --out results/throughput-lanes.json
	$(PY) measure_kill.py $(FORCE) --variant k --lanes 16 --runs 5 --kills 20 --events 100000 --out results/kill-k.json
	$(PY) measure_rebalance.py $(FORCE) --variant k --lanes 16 --runs 5 --out results/rebalance-k-classic.json
	$(PY) measure_throughput.py $(FORCE) --variants raw,db-d,db,d,p --runs 5 --events 100000 --out results/throughput-pipelined.json
	$(PY) measure_throughput.py $(FORCE) --variants d,p,p@2,db,db@2 --runs 5 --events 100000 --out results/throughput-connections.json
	$(PY) -m measurements.profile_p --out results/profile-p.txt
	# p's lives are shorter than M1's 1-8 s: at those, p drains 10,000 events before the 20th kill
	$(PY) measure_kill.py $(FORCE) --variant p --connections 1 --runs 5 --kills 20 --events 10000 --life 0.3,2 \
	  --out results/kill-p.json
	# two connections drain faster still: 20,000 events, so that all 20 kills land mid-stream
	$(PY) measure_kill.py $(FORCE) --variant p --connections 2 --runs 5 --kills 20 --events 20000 --life 0.3,2 \
	  --out results/kill-p-connections2.json
	$(PY) measure_rebalance.py $(FORCE) --variant p --runs 5 --out results/rebalance-p-classic.json
	$(PY) measure_kill.py $(FORCE) --variant o --runs 5 --out results/kill-o.json
	$(PY) measure_rebalance.py $(FORCE) --variant o --runs 5 --out results/rebalance-o-classic.json
	$(PY) measure_throughput.py $(FORCE) --variants c,o --runs 5 --events 20000 --out results/throughput-offsets.json
	$(PY) measure_throughput.py $(FORCE) --variants c,d,p --inbox-rows 0,10000000,50000000 --id-type text,uuid-v7 \
	  --events-of c=5000 --runs 5 --events 100000 --out results/throughput-inbox.json
	$(PY) measure_throughput.py $(FORCE) --variants c,d,p --consumers 1,2,3 --events-of c=20000 --runs 5 --events 100000 \
	  --out results/throughput-consumers.json
	$(PY) -m measurements.measure_latency $(FORCE) --variants c,d,p --rates 200,500,5000 --runs 5 --out results/latency.json
	$(PY) -m measurements.measure_eos $(FORCE) --variant all --runs 5 --kills 20 --events 10000 --out results/eos.json
	$(PY) -m measurements.measure_publish $(FORCE) --source all --variant all --runs 5 --out results/publish.json
	# the post's shortcuts join the same file's runs (no $(FORCE): it would start the file over)
	$(PY) -m measurements.measure_publish --source all --variant shortcuts --runs 5 --out results/publish.json
	$(PY) -m measurements.measure_faults $(FORCE) --fault pg-restart --variant c,c-reconnect --runs 5 \
	  --out results/faults-reconnect.json
	$(PY) -m measurements.measure_retention $(FORCE) --variant all --runs 5 --out results/retention.json
	$(PY) -m measurements.measure_retention_load $(FORCE) --runs 5 --out results/retention-load.json
	$(MAKE) setup-frameworks
	$(PY) measure_kill.py $(FORCE) --variant frameworks --runs 5 --kills 20 --events 10000 --out results/kill-frameworks.json
	$(PY) measure_rebalance.py $(FORCE) --variant frameworks --runs 5 --out results/rebalance-frameworks-classic.json
	$(PY) measure_throughput.py $(FORCE) --variants c,d,p,fs-ack,fs-inbox,qx-eos-keyed --runs 5 --events 20000 \
	  --events-of d=100000,p=100000,qx-eos-keyed=100000 --out results/throughput-frameworks.json
	$(PY) -m measurements.measure_async_commit $(FORCE) --runs 5 --out results/async-commit.json
	$(PY) measure_throughput.py $(FORCE) --against 1b663da --variants p,db,p@2,db@2,d --runs 7 --events 100000 \
	  --out results/throughput-against.json
	$(PY) -m measurements.measure_cores $(FORCE) --runs 5 --out results/throughput-cores.json
	$(PY) measure_throughput.py $(FORCE) --against 9ff66d5 --variants p,p@2,d --runs 5 --events 100000 \
	  --out results/throughput-commits.json
	$(PY) measure_throughput.py $(FORCE) --variants p,p-bare --runs 5 --events 100000 --out results/throughput-bare.json
	$(PY) measure_throughput.py $(FORCE) --variants d,p,p@2 --accounts 100,10000 --runs 5 --events 100000 \
	  --out results/throughput-accounts.json
	$(PY) measure_throughput.py $(FORCE) --variants c,d,p --consumers 1,2,3 --accounts 100,10000 --events-of c=20000 \
	  --runs 5 --events 100000 --out results/throughput-consumers-accounts.json
	$(PY) -m measurements.measure_latency $(FORCE) --variants c,d,p --load 0.5,0.8,0.95 --capacity-events-of c=3000 --runs 5 \
	  --out results/latency-saturation.json
	$(PY) -m measurements.measure_latency $(FORCE) --variants c,d,p --rates 200,5000 --sweep-batch 50,10,1 --runs 5 \
	  --out results/latency-batch.json
	$(PY) -m measurements.measure_faults_more $(FORCE) --fault lost-commit-reply --variant b,c,d,p,o,a2 --runs 5 --events 2000 \
	  --out results/faults-more.json
	# the other faults join faults-more.json's runs (no $(FORCE): it would start the file over)
	for f in pause-postgres pause-consumer topic-recreated pg-max-connections; do $(PY) -m measurements.measure_faults_more \
	  --fault $$f --variant b,c,d,p,o --runs 5 --events 2000 --out results/faults-more.json || exit 1; done
	for f in disk-full sigterm; do $(PY) -m measurements.measure_faults_more \
	  --fault $$f --variant b,c,d,p,o,a2 --runs 5 --events 2000 --out results/faults-more.json || exit 1; done
	$(PY) -m measurements.measure_faults_more $(FORCE) --fault pause-consumer --variant c,d,p,o --runs 5 --events 2000 \
	  --idle-tx-timeout-ms 5000 --out results/faults-more-idle-tx.json
	# M10's offsets-expired needs a broker that forgets an empty group's offsets in a minute: a stack of
	# its own (docs/faults-more.md, "Running offsets-expired"); not run here
	$(MAKE) measure-conformance
	$(PY) -m lab.report

# The conformance table (docs/conformance.md): each consumer through the seven checks, about 13
# minutes each; the Java and Go pairs need `make examples`, the FastStream rows `make setup-frameworks`.
measure-conformance: up examples setup-frameworks
	$(PY) -m measurements.conformance $(FORCE) --command "python consume.py" --out results/conformance-consume-py.json
	for c in InboxConsumer:inbox AutoCommitConsumer:auto-commit; do \
	  java="java -cp examples/java/target/consumers.jar inbox.$${c%%:*}"; \
	  $(PY) -m measurements.conformance $(FORCE) --command "$$java" --version-command "$$java --version" \
	    --out results/conformance-java-$${c##*:}.json || exit 1; done
	for c in inbox autocommit; do \
	  $(PY) -m measurements.conformance $(FORCE) --command "examples/go/bin/$$c" --version-command "examples/go/bin/$$c --version" \
	    --out results/conformance-go-$$c.json || exit 1; done
	for v in fs-inbox fs-inbox-fixed c d p k o; do \
	  $(PY) -m measurements.conformance $(FORCE) --variant $$v --out results/conformance-$$v.json || exit 1; done

report: setup
	$(PY) -m lab.report

# Three workers (pytest-xdist) on two cores, since most tests wait on consumers, pauses and
# timeouts rather than compute (the suite's CPU time is a fraction of its wall time); a group
# that shares state (xdist_group) stays in one worker. The tests that restart a service, and a
# few that mostly wait on a long stall or pause (marked serial), run at the same time on a second
# stack of their own (SERIAL_STACK: other ports, its own data under .cache/serial), so no restart
# lands under another test; their output follows the rest's. Plain `pytest` runs them all, one at
# a time, on the one stack.
# The tests marked root (pytest -m root: the partition faults, the namespace relay, a small disk)
# build network namespaces with `ip netns` or mount a tmpfs; without root they fail, and this
# says so before they start.
# LAB_TEST_SEED (tests/seeds.py) is refused in one line before any service starts. Each lane
# ends listing its slowest tests: the suite's budget is ten minutes, and this shows what nears it.
test: test-seed up
	@[ "$$(id -u)" = 0 ] || echo "make test: the $$($(PY) -m pytest -m root --collect-only -q 2>/dev/null | tail -1 | cut -d/ -f1) tests marked root (network partitions, a small disk: ip netns, mount) need root and will fail as $$(id -un)" >&2
	$(SERIAL_STACK) $(PY) -m lab.stack up
	@$(SERIAL_STACK) $(PY) -m pytest -p no:cacheprovider --durations=5 -m serial > .cache/serial/pytest.log 2>&1 & serial=$$!; \
	  trap 'kill $$serial 2>/dev/null' INT TERM; \
	  echo "$(PY) -m pytest -n 3 --dist loadgroup -m \"not serial\"  (and -m serial beside it, on the second stack)"; \
	  $(PY) -m pytest -n 3 --dist loadgroup --durations=10 -m "not serial"; rest=$$?; \
	  wait $$serial; restarts=$$?; echo "--- the tests marked serial, on the second stack:"; cat .cache/serial/pytest.log; \
	  [ $$rest = 0 ] && [ $$restarts = 0 ]

test-seed:
	@python3 -c "import sys; from tests import seeds; sys.exit(seeds.SHIFT is None and \
	  f'LAB_TEST_SEED={seeds.RAW!r}: give a whole number, 0 or more (LAB_TEST_SEED=100 make test)')"

# M9's frameworks on the real services, in their own environments (FastStream; Quix in .venv-quix).
test-frameworks: up setup-frameworks
	$(PY) -m pytest tests/frameworks

# The consumers outside Python, through the same harnesses as any command (`--command`).
test-examples: up examples
	$(PY) -m pytest tests/examples

# The tests that stand for the post's 13 (README, "The post's 13 tests").
test-post: up
	$(PY) -m pytest -m post

# The replicated lab (three Kafka nodes, a Postgres primary and its standby), beside the single-node stack.
up-replicated: setup
	$(PY) -m lab.stack up --replicated

# Its own suite, apart from `make test` (which stays under 10 minutes): up, a leader kill, a failover, down.
test-replicated: setup
	$(PY) -m pytest tests/replicated

# M8, every fault and variant; Postgres failovers under both replication modes.
measure-cluster: up-replicated
	eval "$$($(PY) -m lab.stack env --replicated)" && \
	  $(PY) -m measurements.measure_cluster $(FORCE) --fault all --variant all --pg-replication both --runs 5 \
	  --events 2000 --rate 100 --out results/cluster.json && \
	  $(PY) -m measurements.measure_cluster $(FORCE) --fault leader-kill --variant b,c --acks 1 --runs 5 --events 2000 \
	  --rate 100 --out results/cluster-acks1.json

# Style, and the import rule (pyproject.toml: ruff's TID rules for the post's files,
# import-linter's contracts for the packages); CI runs it first.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
