"""Component ids of every page, in one place, prefixed by page."""

from __future__ import annotations

# Shell
URL = "shell-url"
SESSION_PICKER = "shell-session"
LOGOUT = "shell-logout"
SESSION_ALERT = "shell-session-alert"
#: Navbar links: pattern-matching ids {"type": NAV_LINK, "path": page path}.
NAV_LINK = "shell-nav"

# Sessions page
SESSIONS_TABLE = "sessions-table"
UPLOAD = "sessions-upload"
UPLOAD_RESULT = "sessions-upload-result"
SES_PICK = "sessions-pick"
SES_LABEL = "sessions-label"
SES_NOTE = "sessions-note"
SES_SAVE = "sessions-save"
SES_SAVED = "sessions-saved"

# Pod Viewer
POD_STEP = "pod-step"
POD_MODE = "pod-mode"
POD_BARS = "pod-bars"
POD_LINES = "pod-lines"
POD_HEATMAP = "pod-heatmap"
POD_BADGES = "pod-badges"
POD_TABLE = "pod-table"
POD_NOTES = "pod-notes"
POD_HINT = "pod-hint"
#: The busy / idle GPUs line (Pod Viewer, Ops and Diagnostics pages).
DEVICES = "devices"
POD_CSV = "pod-csv"
POD_PARQUET = "pod-parquet"
POD_DOWNLOAD = "pod-download"
# The Pod Viewer at pod size (more hosts than ``pod_viewer.POD_HOSTS``)
POD_HOSTS = "pod-hosts"
POD_GROUP = "pod-group"
POD_METRIC = "pod-metric"
POD_MAP_UPLOAD = "pod-map-upload"
POD_MAP_ERROR = "pod-map-error"
POD_SUMMARY = "pod-summary"
POD_OUTLIERS = "pod-outliers"
POD_DIST = "pod-dist"
POD_BARS_NOTE = "pod-bars-note"

# Timeline
TL_GRAPH = "tl-graph"
TL_SEARCH = "tl-search"
TL_WORKER = "tl-worker"
TL_OUTLIERS = "tl-outliers"
TL_DETAILS = "tl-details"
TL_STATS = "tl-stats"
TL_PLANES = "tl-planes"
TL_STEP = "tl-step"
TL_WINDOW = "tl-window"
#: the window shown (the canvas zooms in the browser; the URL and the controls keep it)
TL_VIEW = "tl-view"
#: the bar clicked on the canvas (worker, event row)
TL_CLICK = "tl-click"

# Capture
CAP_ADDRESSES = "cap-addresses"
CAP_MANIFEST = "cap-manifest"
CAP_DURATION = "cap-duration"
CAP_DELAY = "cap-delay"
CAP_HOST_LEVEL = "cap-host-level"
CAP_PY_LEVEL = "cap-py-level"
CAP_RETRIES = "cap-retries"
CAP_LABEL = "cap-label"
CAP_NOTE = "cap-note"
CAP_START = "cap-start"
CAP_PROGRESS = "cap-progress"
CAP_RESULT = "cap-result"
CAP_WATCH_EVERY = "cap-watch-every"
CAP_WATCH_KEEP = "cap-watch-keep"
CAP_WATCH_TRIGGERS = "cap-watch-triggers"
CAP_WATCH_RISE = "cap-watch-rise"
CAP_WATCH_START = "cap-watch-start"
CAP_WATCH_NOW = "cap-watch-now"
CAP_WATCH_STOP = "cap-watch-stop"
CAP_WATCH_SAID = "cap-watch-said"
CAP_WATCH_STATUS = "cap-watch-status"
CAP_WATCH_TICK = "cap-watch-tick"

# History page
HIST_GO = "hist-go"
HIST_TICK = "hist-tick"
HIST_SEEN = "hist-seen"
HIST_STATUS = "hist-status"
HIST_GRAPH = "hist-graph"
HIST_CHANGES = "hist-changes"
HIST_CHANGE_LIST = "hist-change-list"
HIST_TABLE = "hist-table"

# Ops
OPS_WORKER = "ops-worker"
OPS_BY = "ops-by"
OPS_DEVICE = "ops-device"
OPS_FILTER = "ops-filter"
OPS_CHILDREN = "ops-children"
OPS_TABLE = "ops-table"
OPS_TOP = "ops-top"
OPS_TREEMAP = "ops-treemap"
OPS_COMPARE = "ops-compare"
OPS_CSV = "ops-csv"
OPS_PARQUET = "ops-parquet"
OPS_DOWNLOAD = "ops-download"

# Android / TFLite
TFL_INVOKE = "tfl-invoke"
TFL_WATERFALL = "tfl-waterfall"
TFL_CPU = "tfl-cpu"
TFL_CSV = "tfl-csv"
TFL_PARQUET = "tfl-parquet"
TFL_DOWNLOAD = "tfl-download"

# Compare
CMP_BASELINE = "cmp-baseline"
CMP_BODY = "cmp-body"
CMP_CSV = "cmp-csv"
CMP_PARQUET = "cmp-parquet"
CMP_DOWNLOAD = "cmp-download"
CMP_NOTE = "cmp-note"
CMP_WHY = "cmp-why"

# A big session being analysed (any page)
PREP_SESSION = "prep-session"
PREP_BAR = "prep-bar"
PREP_WHERE = "prep-where"
PREP_CANCEL = "prep-cancel"
PREP_TICK = "prep-tick"
PREP_DONE = "prep-done"
PREP_HEAD = "prep-head"
#: The shell's Store whose change renders the page again (Dash pages' routing input
#: ``RENDER_INPUT``): a big session's page once its analysis is done, without a reload.
PAGE_RENDER = "page-render"
RENDER_INPUT = "podscope_render"
OPS_NOTE = "ops-note"

# Workers (why slow across workers)
WK_TABLE = "wk-table"
WK_CSV = "wk-csv"
WK_PARQUET = "wk-parquet"
WK_DOWNLOAD = "wk-download"
WK_SLOW = "wk-slow"
WK_COLLECTIVES = "wk-collectives"
WK_ITERATORS = "wk-iterators"

# XLA ops
XLA_WORKER = "xla-worker"
XLA_DEVICE = "xla-device"
XLA_EXECUTION = "xla-execution"
XLA_FILTER = "xla-filter"
XLA_CSV = "xla-csv"
XLA_PARQUET = "xla-parquet"
XLA_DOWNLOAD = "xla-download"
XLA_NOTE = "xla-note"
XLA_PEAKS = "xla-peaks"
XLA_ROOFLINE = "xla-roofline"
XLA_PROFILE = "xla-profile"
XLA_COLOR = "xla-color"
XLA_PROFILE_GRAPH = "xla-profile-graph"
XLA_NODE_TABLE = "xla-node-table"
XLA_TABLE = "xla-table"
XLA_DETAILS = "xla-details"
CMP_XLA = "cmp-xla"
