"""`python -m toy`: the toy run (toy/__init__.py)."""
from toy import main

main()
