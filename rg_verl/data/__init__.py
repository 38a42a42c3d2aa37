"""The items: reasoning-gym datasets generated on the fly, file datasets (GSM8K, MATH), curricula.

``dataset`` is verl's ``data.custom_cls``; ``docs/layout.md`` says what each module holds, ``docs/data.md`` the rules.
"""
