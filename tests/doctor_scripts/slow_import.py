"""Hostile: imports a module that takes a second to import (as torch._dynamo
does), then sleeps: the time limit ends before the import does."""

import time

import slow_module  # noqa: F401

time.sleep(60)
