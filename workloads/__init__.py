"""The built-in workloads: one file per workload, each defining ``build(spec)`` (see
:mod:`profkit.workloads` for the interface). The folder stays at the top of the source tree
and ships inside the wheel as the subpackage ``profkit.builtin_workloads``, so that
``profkit workloads`` and ``profkit run NAME`` find them after a plain ``pip install``;
``profkit.workloads`` lists every module here whose name does not start with ``_``.
"""
