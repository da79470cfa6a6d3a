"""Analyses over the kernel table: DataFrame (or rows) in, plain data out. Nothing here
prints, plots or touches the database."""
