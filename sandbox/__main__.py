"""`python -m sandbox FD CONFIG`: the fork server, as EnvSandbox starts it (sandbox/forkserver.py)."""
import json
import sys

from sandbox import forkserver

forkserver.serve_forever(int(sys.argv[1]), json.loads(sys.argv[2]))
