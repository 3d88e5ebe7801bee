// Light/dark theme, remembered in localStorage; applied before the first render (no inline
// script: the CSP is script-src 'self').
export type Theme = 'light' | 'dark';
const KEY = 'trainyard.theme';

export function storedTheme(): Theme {
  try {
    const t = localStorage.getItem(KEY);
    if (t === 'light' || t === 'dark') return t;
  } catch {
    // storage unavailable
  }
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

export function applyTheme(t: Theme): void {
  document.documentElement.dataset.theme = t;
  document.documentElement.style.colorScheme = t;
  try {
    localStorage.setItem(KEY, t);
  } catch {
    // storage unavailable
  }
}
