"""``conveyor bench``: conveyor against PyTorch's DataLoader and other input
pipelines, in the same run.

This package imports nothing when imported (``import conveyor`` never imports
it; the ``conveyor`` command line imports ``conveyor.bench.cli``). Its modules:

* ``cli``: the command: its arguments, the plan of each benchmark's sides,
  the runs, the printed report and the JSON.
* ``runner``: runs one measurement in a worker process (a fresh one each, or
  one reused process for ``bench --quick``), sampling its memory.
* ``worker``: the worker process: runs one measurement and prints its figures.
* ``machine``: the machine and software the figures were measured on.
* ``reference``: the stock PyTorch pipelines conveyor is compared with
  (torchvision's transforms when importable, else an equivalent PIL version).
* ``peers``: the other pipelines of ``throughput --peers`` (torchvision v2,
  DALI, SPDL, FFCV).
* ``autotune``: ``bench autotune``, fixed settings against autotune.
* ``lambda_cost``: ``bench lambda``, the cost of an identity ``T.Lambda``.
* ``http_server``, ``s3_server``: the local HTTP and S3 servers of ``bench
  remote`` (and of the remote-storage tests).
* ``procmem``: samples the memory of a process tree from /proc.
* ``report``: summaries, the printed table and the plot.
* ``subset``: which images of a folder a run takes, the same on every side.
"""
