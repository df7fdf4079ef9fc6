"""The ``envengineer`` command line."""
