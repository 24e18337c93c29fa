import sys

from diffgrpo.train.run import cli

sys.exit(cli())
