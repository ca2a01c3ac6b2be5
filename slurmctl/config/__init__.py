"""Configuration, at the bottom of the house: what an admin writes (site.yaml) and what a researcher
writes (run.yaml), their loaders, their cached read-only views, and prices.

    locate    where site.yaml is (standard library only)
    models    SiteConfig and RunSpec (pydantic): every key, default, coercion and rule; the loaders
    views     the read path's pydantic-free views of both files (validated once, then cached)
    pricing   what an allocation costs (standard library only)
    user      the user's own settings (~/.config/slurmctl/config.yaml)

Nothing here imports a slurmctl package other than the leaves (errors, durations, safe_yaml,
fsutil, usercache). Import the module you need; this package imports nothing, so `status` pays
for pydantic only on a cache miss.
"""
