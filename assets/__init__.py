"""PodScope's static files (Bootstrap CSS, styles), served by the Dash app with no CDN."""
