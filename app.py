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
    st.Page("views/idle.py", title="Idle time", icon=":material/hourglass_empty:"),
    st.Page("views/pod.py", title="Pod", icon=":material/grid_view:"),
    st.Page("views/timeline.py", title="Timeline", icon=":material/view_timeline:"),
    st.Page("views/memory.py", title="Memory", icon=":material/memory:"),
    st.Page("views/scaling.py", title="Scaling", icon=":material/trending_up:"),
    st.Page("views/recompilation.py", title="Recompilation", icon=":material/build:"),
    st.Page("views/compare.py", title="Compare / what-if", icon=":material/compare_arrows:"),
    st.Page("views/plan.py", title="Plan", icon=":material/travel_explore:"),
    st.Page("views/validation.py", title="Validation", icon=":material/fact_check:"),
]

common.seed_if_empty()
with common.page_connection():
    st.navigation(PAGES).run()
