"""The settings: the schema (`schema`), reading a config file (`reading`), how a refused value is
worded (`wording`), and the user's folders (`folders`). Import from the module that does the job.
"""
