"""Reports rendered from measured records: tables, figures, and the files that hold them. Nothing here measures.

- ``arena.report.estimators``: ``arena estimators``'s table and figure (``write_estimators``);
- ``arena.report.study``: ``arena report STUDY``, the comparison of a study's arms read back from MLflow
  (``write_study_report``), built on ``records`` (reading), ``stats`` (numbers) and ``figures`` / ``tables``
  (drawing and typesetting).
"""
from arena.report.estimators import ESTIMATOR_COLUMNS, estimators_figure, estimators_table, write_estimators

__all__ = ["ESTIMATOR_COLUMNS", "estimators_figure", "estimators_table", "write_estimators"]
