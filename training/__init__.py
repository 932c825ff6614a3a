"""The local guardian's training: corpora, the generators that write them, and the code that
fits the models and writes the artefact the app loads (guardian_core/adapters/local_model/).

The app never imports this package to answer: only a retrained version of the local guardian
(the learning loop) fits models at run time, and imports `training.fit` then. See README.md.
"""
