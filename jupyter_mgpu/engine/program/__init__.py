"""Each ``%mgpu_run`` as a fresh program: the script runner, what a run leaves behind and how it is undone
(``fresh_program``, ``library_state``, ``process_settings``)."""
