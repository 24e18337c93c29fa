import sys

from diffgrpo.train.run import main

sys.exit(main())
