"""Busy is not hung: every collective a rank calls is watched (``collective_watch``), recorded in the host's shared
table (``collective_table``), named by its call site (``collective_calls``) and guarded against mismatches
(``collective_guard``)."""
