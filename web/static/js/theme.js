// Applies the chosen theme before the first paint, so it never flashes the other one.
// A classic script on purpose: modules run after parsing.
try {
  const t = localStorage.getItem("stepgate.theme");
  if (t === "light" || t === "dark") document.documentElement.dataset.theme = t;
} catch {}
