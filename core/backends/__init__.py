"""Backends: the small primitive set each device implements (see base.Backend)."""
