"""Helpers of ``conveyor bench`` (see ``conveyor.bench``).

* ``reference``: the stock PyTorch pipelines conveyor is compared with
  (torchvision's transforms when importable, else an equivalent PIL version).
* ``worker``: runs one measurement in a fresh process and prints its figures.
* ``procmem``: samples the memory of a process tree from /proc.
* ``report``: summaries, the printed table and the plot.
"""
