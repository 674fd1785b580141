"""Byte transport between hosts and processes: links and their agent, unix sockets, network interfaces."""
