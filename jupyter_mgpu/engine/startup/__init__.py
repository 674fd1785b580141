"""Starting a rank: the supervisor (``launcher``), the controller, ipengines under MPI and launchers, the rank's
runtime set-up (devices, group, servers), its start-up marks and the watchdog that ends orphans."""
