"""Code that runs inside the engines (one process per device): never imports the controller side."""
