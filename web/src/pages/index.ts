import "../site";
