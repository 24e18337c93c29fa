import sys

from .runner import cli

sys.exit(cli())
