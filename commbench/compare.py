"""Placeholder, replaced below."""
def add_parser(sub, transports):
    pass
