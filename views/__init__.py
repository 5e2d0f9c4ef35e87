"""Streamlit pages of the Podscope dashboard, plus shared helpers and figure builders."""
