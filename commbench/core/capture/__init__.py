"""Packet capture (--traffic): the capture and its HTTP/2 parser, the per-role traffic rows."""
