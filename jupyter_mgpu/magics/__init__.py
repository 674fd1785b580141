"""The ``%mgpu_*`` magics: parse a line (named like ipyparallel's ``%px``), call the API, display."""
