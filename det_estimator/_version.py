"""det-estimator's version: its one copy, read by the package, the command and setup.py.

Imports nothing, so that any module may import it without running the package root.
"""

__version__ = "0.2.0"
