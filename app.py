"""Podscope dashboard: ``streamlit run app.py``.

Pages live in ``views/`` (not ``pages/``, which would switch Streamlit into its
legacy multipage mode). On first start with an empty database the bundled
example scenarios and the strong-scaling sweep are simulated (a few seconds, reported in
the terminal), so a newcomer sees real dashboards at once. The run picked in the sidebar
is kept across pages and in the URL (``?run=3``), so a reload or a shared link shows it.
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

# Headline tiles sit five to a row: at the default 2.25rem "80.9 / 95 GiB" does not fit a
# 1400 px window's column. Slightly smaller values fit every tile, and never get an ellipsis.
st.html("<style>[data-testid='stMetricValue'] { font-size: 1.85rem; }</style>")
with common.page_connection():  # one open file for the render: the run check below reuses it
    common.seed_if_empty()
    common.sync_url()
    st.navigation(PAGES).run()
