"""The items: reasoning-gym datasets generated on the fly, file datasets (GSM8K, MATH), curricula (``docs/data.md``)."""
