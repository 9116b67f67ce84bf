"""The tracekit viewer: ``streamlit run app/main.py`` (roots after ``--``: ``-- --root DIR``)."""
