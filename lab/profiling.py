"""The command line the two profiles share (measurements/profile_d.py, measurements/profile_p.py):
how many credits, in batches of how many, and where to write what they print."""
from lab import cli


def parse_args(description: str, events: int, out_name: str, argv=None, top: bool = False):
    parser = cli.Parser(description=description)
    parser.add_argument("--events", type=int, default=events)
    parser.add_argument("--batch", type=int, default=500)
    if top:
        parser.add_argument("--top", type=int, default=20, help="how many functions to print")
    parser.add_argument("--out", help=f"also write the profile here, e.g. results/{out_name}")
    args = parser.parse_args(argv)
    cli.at_least(parser, args, 1, "events", "batch")
    return args
