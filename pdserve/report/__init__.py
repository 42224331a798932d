"""HTML reports of bench runs and prediction checks (`--report DIR`, `pdserve report`).

Pure page builders (one per command: bench_page, faults_page, overload_page, predicted_page,
elastic_page) turn a run's JSON document into a `Page` of charts (charts.py: matplotlib to
inline SVG); page.py renders it to one self-contained HTML file; browser.py opens it in
headless Chromium.
"""
