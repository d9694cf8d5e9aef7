"""Rewrite the tables (`<!-- report:NAME -->`) and the quoted figures (`<!-- fig:NAME -->`) of
README.md and docs/, and the charts, from results/; `--check` only says which of them differ.
"""
import re
import sys

from lab import charts, claims, cli, costs, figures, overview, sections, tables
from lab.settings import ROOT

README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]  # every file that may hold markers
SECTIONS = {"claims": claims.claims_section, **overview.SECTIONS, **sections.SECTIONS, **costs.SECTIONS}
FIG = re.compile(r"<!-- fig:([a-z0-9][a-z0-9.@/-]*) -->(.*?)<!-- /fig -->", re.S)  # names: lowercase


def made(make, otherwise) -> str:
    """What make() makes, or otherwise(missing) while a results file it needs is missing."""
    try:
        return str(make())
    except tables.Missing as missing:
        return otherwise(missing)


def render(text: str, unknown: list[str] | None = None) -> str:
    """`text` with every section and every figure it marks made afresh from results/; a figure
    stays as it stands if its file is missing or nobody makes it (then its name goes to `unknown`)."""
    for name, make in SECTIONS.items():
        pattern = re.compile(rf"(<!-- report:{name} -->\n).*?(<!-- /report:{name} -->)", re.S)
        text = pattern.sub(lambda m, make=make: m.group(1) + made(make, str) + m.group(2), text)
    unknown = [] if unknown is None else unknown

    def figure(m: re.Match) -> str:
        name, value = m.groups()
        if name not in figures.FIGURES:
            unknown.append(name)
            return m.group(0)
        return f"<!-- fig:{name} -->{made(figures.FIGURES[name], lambda _: value)}<!-- /fig -->"
    return FIG.sub(figure, text)


def main(argv=None) -> int:
    parser = cli.Parser(description="Rewrite README.md's and docs/'s results tables and figures from results/.")
    parser.add_argument("--check", action="store_true", help="only check that they are up to date")
    args = parser.parse_args(argv)
    stale, unknown = charts.stale() if args.check else [], []
    for document in DOCUMENTS:
        current = document.read_text()
        if (fresh := render(current, unknown)) == current:
            continue
        if args.check:
            stale.append(str(document.relative_to(ROOT) if document.is_relative_to(ROOT) else document))
        else:
            document.write_text(fresh)
    said = [f"a fig marker names {name}, which lab/figures.py does not make" for name in dict.fromkeys(unknown)]
    if args.check:
        said = [f"{', '.join(stale)} out of date with results/; run `python -m lab.report`"] * bool(stale) + said
    else:
        drawn = [str(out.relative_to(ROOT)) for out in charts.build()]
        print(f"README.md and docs/ rewritten{', charts: ' + ', '.join(drawn) if drawn else ''}")
    if said:
        print("report.py: " + "; ".join(said), file=sys.stderr)
        return 1
    if args.check:
        print("README.md, docs/ and the charts match results/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
