"""`pdserve profile`: calibrate the router's cost model from the running engines.

Pure parts: `plan` (what to measure, prompts), `samples` (cost-model samples from responses),
`report` (table rows, errors, JSON), `yaml_edit` (the config file's `cost_model` block as
text). `pool` reads earlier runs' `--json` reports and pools their samples with this run's
(pure but for reading the files). I/O: `measure` (the HTTP client), `cli` (the typer command
and its rich output).
"""
