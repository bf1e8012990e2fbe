import this_module_does_not_exist  # noqa: F401  (the runtime must exit naming this file)
