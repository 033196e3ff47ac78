"""Operators written against keyshift's Operator API from the outside, as a user would.

They import only ``keyshift.apps`` (the API) and ``keyshift.schemas`` (column types), and
are loaded by ``module:Class``, e.g. ``keyshift run --app keyshift.examples.sessions:SessionOperator``.
"""
