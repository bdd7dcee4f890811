"""`python -m sandbox`: the fork server, as EnvSandbox starts it (sandbox/forkserver.py)."""
from sandbox import forkserver

forkserver.main()
