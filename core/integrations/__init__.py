"""Bridges to other engines (each imported only when used): `ember.integrations.ray`
embeds Ray Data datasets with ember's models."""
