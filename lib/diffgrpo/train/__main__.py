import sys

from diffgrpo.train.launch import main

sys.exit(main())
