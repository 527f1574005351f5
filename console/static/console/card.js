// The card form: Stripe.js confirms the SetupIntent the page was made with, then the form posts
// the PaymentMethod it made (an id, never the card) to the console.
(function () {
  const form = document.getElementById("nc-card");
  const problem = document.getElementById("nc-card-error");
  const stripe = Stripe(form.dataset.key);
  const card = stripe.elements().create("card");
  card.mount("#nc-card-element");
  form.addEventListener("submit", async function (event) {
    event.preventDefault();
    problem.hidden = true;
    const result = await stripe.confirmCardSetup(form.dataset.secret, {
      payment_method: { card: card },
    });
    if (result.error) {
      problem.textContent = result.error.message || "Stripe refused the card.";
      problem.hidden = false;
      return;
    }
    form.elements.payment_method.value = result.setupIntent.payment_method;
    form.submit();
  });
})();
