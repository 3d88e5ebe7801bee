"""`python3 -m trainyard ...` is `yard ...`."""
from trainyard.cli import entry

entry()
