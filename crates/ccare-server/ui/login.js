// The login page: POST /api/auth/session {token} sets the HttpOnly session cookie,
// then the app at / takes over.

const form = document.getElementById("login-form");
const input = document.getElementById("token");
const error = document.getElementById("login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  error.hidden = true;
  let response;
  try {
    response = await fetch("/api/auth/session", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: input.value }),
      credentials: "same-origin",
    });
  } catch (failure) {
    show(`fetch: the server could not be reached (${failure.message})`);
    return;
  }
  if (response.ok) {
    window.location.assign("/");
    return;
  }
  let message = "";
  try {
    const body = await response.json();
    message = body.message || body.error || "";
  } catch {
    message = "";
  }
  show(`http ${response.status}: ${message || response.statusText}`);
});

function show(text) {
  error.textContent = text;
  error.hidden = false;
  input.focus();
}
