"""Clusters across hosts, kernel side: the relay to remote engines (``hub``) and data streams (``streams``)."""
