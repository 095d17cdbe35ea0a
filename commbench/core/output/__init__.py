"""Output: results files, terminal tables, the progress bar."""
