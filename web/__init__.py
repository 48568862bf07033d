"""The local web server and the static pages of ember's browser demos."""
