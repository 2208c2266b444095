"""Model files: the roles, the manifest, the models folder (`store.ModelStore`), downloads that
resume and verify, packs, the hashes pinned and verified. Import from the module that does the
job; this file imports nothing, so `vcamd.config.roles` stays light."""
