"""The trained reader of what people write: an intent for every inbound
message and, apart and first, whether it asks us to stop.

Trained here, offline, on the CPU (`manage.py train_intents`: scikit-learn
over word and character n-grams of the message and of our last text before
it), from the labelled corpus in agents/ai/corpus/ (README there); measured
on a frozen test file nobody tunes on (`manage.py eval_intents`). The
trained artefact ships in `trained/` with its provenance beside it.
"""
