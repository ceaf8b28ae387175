"""Imported by slow_import.py: a module that takes a second to import."""

import time

time.sleep(1)
IMPORTED = True
