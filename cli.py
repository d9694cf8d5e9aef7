"""The one argument parser every script uses, so that bad flags get one line that says what is wrong."""
import argparse
import sys


class Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        sys.exit(2)
