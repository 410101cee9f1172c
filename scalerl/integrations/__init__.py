"""The predictive framework (§1–§2) inside trainers people already use.

* :mod:`scalerl.integrations.trl`: a ``transformers`` ``TrainerCallback`` (TRL's ``GRPOTrainer`` or any
  ``Trainer``) that fits Eq. 1 as evaluations arrive and logs the forecast through the trainer's own loggers.

The files those trainers write (``trainer_state.json``, verl's file logger, TensorBoard events) are read by
:func:`scalerl.curves.load_series`, so ``scalerl fit`` and ``scalerl compare`` take them directly.
"""
