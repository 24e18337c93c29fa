import sys

from diffgrpo.train.launch import cli

sys.exit(cli())
