"""Analyses of stored runs: each takes the store and a run record, gets its data from the
store's methods (no SQL here) and returns typed records. Nothing here prints or plots."""
