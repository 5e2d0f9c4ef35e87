"""Podscope dashboard: ``streamlit run app.py``.

Pages live in ``views/`` (not ``pages/``, which would switch Streamlit into its
legacy multipage mode). On first start with an empty database the bundled
example scenarios are simulated, so a newcomer sees real dashboards at once.
"""

from __future__ import annotations

import streamlit as st

from views import common

st.set_page_config(page_title="Podscope", page_icon=":material/memory:", layout="wide")

PAGES = [
    st.Page("views/overview.py", title="Overview", icon=":material/dashboard:", default=True),
    st.Page("views/validation.py", title="Validation", icon=":material/fact_check:"),
]

common.seed_if_empty()
st.navigation(PAGES).run()
